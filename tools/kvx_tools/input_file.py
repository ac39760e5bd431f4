"""The rule the tools follow before opening an input file, as kvx's loader does (engine/model/regular_file.h):
it must be a regular file. Opening a FIFO blocks until something writes to it, for ever if nothing does, and a
device can be endless; a directory only gives a confusing error later."""

import os
import stat


def unreadable_reason(path):
    """Why path cannot be read as an input file ("cannot read (No such file or directory)", "not a regular
    file ...", ...), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"cannot read ({e.strerror or e})"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(mode):
        return "not a regular file (a FIFO or a device?)"
    return None
