"""What the file dialogs share besides the frame (`tui.widgets.dialogs.Dialog`): small
formatting helpers and the checks of a name."""

from __future__ import annotations

import stat
from collections.abc import Sequence

from api_client import errors as api_errors
from tui.errors import unwrap
from tui.text import printable

# Names the agent refuses anyway; refusing them here says why before a round trip.
MAX_NAME_BYTES = 255


# --- formatting -------------------------------------------------------------------------------


def permission_string(mode: int) -> str:
    """`0o755` → `rwxr-xr-x` (setuid, setgid and sticky shown the `ls` way)."""
    return stat.filemode((mode & 0o7777) | stat.S_IFREG)[1:]


def octal(mode: int) -> str:
    """`0o755` → `0755`; the special bits, when present, make it `4755`."""
    return f"{mode & 0o7777:04o}"


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else (words or word + 's')}"


def describe_items(names: Sequence[str]) -> str:
    """`index.php` for one name, `3 items` for more."""
    if len(names) == 1:
        return printable(names[0].rstrip("/").rpartition("/")[2] or names[0])
    return plural(len(names), "item")


def gone_meanwhile(exc: BaseException, path: str) -> str | None:
    """What to say when `exc` means `path` is no longer on the server (deleted or renamed by
    someone else since the panel listed it); None for any other error."""
    if not isinstance(unwrap(exc), api_errors.NotFound):
        return None
    return f"{describe_items([path])} is no longer there: renamed or deleted meanwhile. F5 lists the folder again."


def name_problem(name: str) -> str | None:
    """Why `name` cannot be the name of a file or folder, or None when it can."""
    if not name or not name.strip():
        return "The name is empty."
    if name in (".", ".."):
        return f"{name!r} is not a name a file can have."
    if "/" in name:
        return "A name cannot contain '/'."
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return "A name cannot contain control characters."
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"The name is longer than {MAX_NAME_BYTES} bytes."
    return None


def folder_path_problem(path: str) -> str | None:
    """Why `path` (`a/b`: folders to make, each level checked as a name) cannot be made, or None."""
    parts = path.strip("/").split("/")
    if not path.strip("/"):
        return "The name is empty."
    if "" in parts:
        return "A path cannot contain '//'."
    return next(filter(None, map(name_problem, parts)), None)


def format_duration(seconds: float) -> str:
    """`75` → `1:15`, `3725` → `1:02:05`."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
