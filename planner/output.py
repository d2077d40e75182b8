"""Output: the terminal's console, and files (a path checked before the work, then written atomically; every OSError
names the flag)."""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from planner.errors import PlannerError

_TMP_NAME_CHARS = 200        # of the target's name in the temporary file's: ".NAME.XXXXXXXX.tmp" stays <= 255


EXIT_BROKEN_PIPE = 128 + 13      # stdout closed early (plan ... | head): what a shell reports after SIGPIPE


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich exits 1 when the reader goes away, which from `plan` means "nothing fits": exit as SIGPIPE would."""
        try:
            super().on_broken_pipe()
        except SystemExit:
            raise SystemExit(EXIT_BROKEN_PIPE) from None


TABLE_WIDTH = 240    # a table may take this many columns: rich would squeeze it to the terminal, cutting "4…"


def console(stderr: bool = False) -> Console:
    """Rich console at least TABLE_WIDTH wide, on a terminal too: a table keeps its natural width (the terminal wraps
    a wider one's lines; every digit stays), and prose is soft-wrapped by the terminal as before."""
    out = _Console(stderr=stderr, soft_wrap=True)
    if out.width < TABLE_WIDTH:
        out = _Console(stderr=stderr, soft_wrap=True, width=TABLE_WIDTH)
    return out


def check_writable(path, flag: str = "--output") -> Path:
    """The file `flag` will write, as a Path, or the one-line error: a directory, a missing or unwritable directory, a
    name the file system refuses (too long, ...). A symbolic link is followed (the link stays, its target is
    written). Run it before the work, so a bad path fails fast."""
    given = Path(path).expanduser()
    try:
        if given.is_dir():
            raise PlannerError(flag, f"{given} is a directory; expected a file path")
        # a device, pipe or this process's own output: through the path given (/dev/stdout's link has no real path)
        if _is_stream(given) or _own_stream(given) is not None:
            if not os.access(given, os.W_OK):
                raise PlannerError(flag, f"cannot write {given}: permission denied")
            return given
        target = Path(os.path.realpath(given))
        if not target.parent.is_dir():
            what = "is a file, not a directory" if target.parent.exists() else "does not exist"
            raise PlannerError(flag, f"directory {target.parent} {what}")
        try:
            os.lstat(target)                      # ENAMETOOLONG and the like; a file not there yet is fine
        except FileNotFoundError:
            pass
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise PlannerError(flag, f"cannot write {given}: directory {target.parent} is not writable")
    except OSError as exc:
        raise PlannerError(flag, f"cannot write {given}: {exc.strerror or exc}") from None
    return target


def _own_stream(path: Path) -> int | None:
    """1 or 2 when `path` is this process's stdout or stderr (/dev/stdout, /dev/fd/1, /proc/self/fd/2, or the file
    the shell redirected them to): written through that descriptor, where the shell's offset and mode live."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return fd
    return None


def _is_stream(target: Path) -> bool:
    """An existing target that is not a regular file (/dev/null, /dev/stdout's terminal or pipe, a FIFO): written
    in place, never replaced by a rename."""
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # not there yet, or under a file (named by the caller)
        return False
    return not stat.S_ISREG(mode)


def write_atomic(path, data: str | bytes, flag: str = "--output") -> None:
    """Write to a temporary file beside `path`, then rename: a failure never leaves a truncated or clobbered file.
    A device, pipe or FIFO (/dev/null) is written in place instead: renaming over it would replace it with a
    regular file; this process's own stdout or stderr (/dev/stdout, even redirected to a file) is written through
    its descriptor. Errors name `flag`, the option that gave the path."""
    target = check_writable(path, flag)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd = _own_stream(target)
        if fd is not None:                        # -o /dev/stdout > file: append where the shell is
            (sys.stdout if fd == 1 else sys.stderr).flush()
            os.write(fd, payload)
            return
        if _is_stream(target):
            with open(target, "wb") as fh:
                fh.write(payload)
            return
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:_TMP_NAME_CHARS]}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)                       # mkstemp creates 0600; give the file normal permissions
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise PlannerError(flag, f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def emit(text: str, output=None) -> None:
    """Data to stdout, or atomically to the file `output` (with a note on stderr)."""
    if output is None:
        print(text, end="")
        return
    write_atomic(output, text)
    print(f"wrote {output}", file=sys.stderr)
