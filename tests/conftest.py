import os

import pytest
from hypothesis import settings

from planner.search import run_search

# Property tests draw the same examples on every run, so a green run means the same checks passed (a random draw
# once found a false property in CI's stead); HYPOTHESIS_PROFILE=explore draws fresh ones to hunt for new cases.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def search_405b_512():
    """The product's headline search, shared by several tests (it is the slowest fixture)."""
    return run_search("405b", 512)
