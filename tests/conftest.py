import pytest

from planner.search import run_search


@pytest.fixture(scope="session")
def search_405b_512():
    """The product's headline search, shared by several tests (it is the slowest fixture)."""
    return run_search("405b", 512)
