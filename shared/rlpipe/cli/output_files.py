"""Where ``report`` and ``compare`` write their page (``-o``): a file in a folder that exists.

Why: the page is written after every read and the rendering. A path whose folder does not exist
used to be created silently (``-o /no/such/dir/x.html`` made folders at the filesystem root), and
a write that failed part-way (``-o /dev/full``) was answered as a bug in rlpipe. Both are the
user's path, so both are answered as such, naming the path and the fix (exit 1, docs/cli.md).

Without ``-o`` the page goes to ``RLPIPE_PAGES_DIR`` when it is set, else the current folder. The
local stack sets it to its own ``pages`` folder (``.rlpipe/<stack>/pages``): a report asked for
during a demo or a local session went into the current folder, the repository's root, beside the
tracked files.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlpipe.cli.exit_codes import CliError, ExitCode

PAGES_DIR = "RLPIPE_PAGES_DIR"


def output_path(given: str | None, default: str) -> Path:
    """The page's path: ``-o`` as given, refused before any work when its folder does not exist
    (nothing is created); else ``default`` in ``RLPIPE_PAGES_DIR`` (made if missing: it is the
    stack's, not the user's) or in the current folder."""
    if not given and (pages := os.environ.get(PAGES_DIR, "")):
        folder = Path(pages)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file of that name, or a folder we may not write in
            raise CliError(
                ExitCode.INVALID_INPUT,
                f"{PAGES_DIR}={folder}: could not make the pages folder ({exc.strerror or type(exc).__name__}); "
                "give -o a file, or set RLPIPE_PAGES_DIR to a folder you may write in",
            ) from exc
        return folder / default
    path = Path(given or default)
    folder = path.parent
    if not folder.is_dir():
        raise CliError(
            ExitCode.INVALID_INPUT,
            f"-o {path}: the folder {folder} does not exist; create it first, or give -o a file in a "
            "folder that exists",
        )
    return path


def write_page(path: Path, html: str) -> None:
    """Write the page; a write the system refuses (a full disk, a device, no permission) is named."""
    try:
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise CliError(
            ExitCode.INVALID_INPUT,
            f"-o {path}: could not write the page ({exc.strerror or type(exc).__name__}); give -o "
            "another file",
        ) from exc
