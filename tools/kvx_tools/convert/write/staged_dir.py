"""Writes a directory's files so that no failure (an error, a full disk, Ctrl-C) leaves behind a directory that
looks valid but is not: one whose marker file (a model directory's config.json) names missing, truncated or
stale files.

Everything is written into a staging folder first, on the same filesystem as the destination so that moving
it is a rename:
  - a new destination: the staging folder is its sibling, renamed into place when complete;
  - an existing destination: the staging folder is inside it, and when complete the marker is removed, the
    files are renamed over their old versions, owned names this write did not produce are removed, and the
    new marker is renamed in last. The directory is not swapped whole because it may hold files that are
    not ours (the ONNX file itself, when a model is converted in place), which must survive.
On failure before that commit the staging folder is removed and the destination is as it was; a failure
during the commit (renames within one folder: unlikely) leaves it without a marker, so it cannot pass for
a model. A killed converter can leave a staging folder, named `.kvx-convert-*` so that it says what it is.
"""

import os
import secrets
import shutil
from pathlib import Path

from ..errors import ConvertError

STAGING_PREFIX = ".kvx-convert-"


def write_staged(out_dir, write_files, owned, marker):
    """write_files(folder) writes the files into folder, which then become out_dir's. owned: every file name
    such a directory may hold (those not written this time are removed from out_dir); marker: the name whose
    presence makes the directory valid, moved in last."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConvertError(f"cannot write {out_dir}: it exists and is not a directory")
    existing = out_dir.is_dir()
    if not existing:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = _new_staging_folder(out_dir if existing else out_dir.parent, "" if existing else f".{out_dir.name}")
    try:
        write_files(staging)
        if existing:
            _move_into(staging, out_dir, owned, marker)
            staging.rmdir()
        else:
            os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _new_staging_folder(parent, prefix):
    """A new empty folder in parent, created with the permissions of a plain mkdir (tempfile's are 0700, which
    a renamed model directory would keep)."""
    while True:
        folder = parent / f"{prefix}{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


def _move_into(staging, out_dir, owned, marker):
    (out_dir / marker).unlink(missing_ok=True)  # from here on out_dir does not look valid until the end
    written = {path.name for path in staging.iterdir()}
    for name in sorted(written - {marker}):
        os.replace(staging / name, out_dir / name)
    for name in sorted(set(owned) - written):
        (out_dir / name).unlink(missing_ok=True)  # a stale file would contradict the new marker
    os.replace(staging / marker, out_dir / marker)
