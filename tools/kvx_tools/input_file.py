"""The rule the tools follow before opening an input file, as kvx's loader does (engine/files/regular_file.h):
it must be a regular file. Opening a FIFO blocks until something writes to it, for ever if nothing does, and a
device can be endless; a directory only gives a confusing error later."""

import os
import stat


def special_file_reason(path):
    """Why an existing path is no input file (a directory, a FIFO, a device), or None: for a regular file, and
    for a path that does not exist, whose opening then says so in the caller's words."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file (a FIFO or a device?)"
    return None


def unreadable_reason(path):
    """Why path cannot be read as an input file ("cannot read (No such file or directory)", "not a regular
    file ...", ...), or None."""
    try:
        os.stat(path)
    except OSError as e:
        return f"cannot read ({e.strerror or e})"
    return special_file_reason(path)
