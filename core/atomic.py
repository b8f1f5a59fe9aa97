"""Atomic file writes: whoever reads a file ddrl writes (a restore, an image viewer, a person
opening summary.json) sees the old content or the new, never half of it, and a crash, power
loss included, leaves one of the two whole.

The new content goes to a temporary name in the same directory (a rename is atomic only within
one file system), is flushed and fsync'ed, then renamed onto the path; the directory is fsync'ed
last, so the rename itself survives a crash. On an exception the temporary file is removed and
the old file is left as it was.

    with atomic_open(path, "w") as f:              # a writer that takes a file object
        json.dump(data, f)
    with atomic_path(path, suffix=".png") as tmp:  # a library that takes a file name
        figure.savefig(tmp)
"""
import contextlib
import os

_WRITE_MODES = ("w", "wt", "wb")


def fsync_directory(directory):
    """Make a rename in ``directory`` durable. Best effort: not every platform can open or
    fsync a directory, and the file's content is already on disk by then."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _staged(path, suffix):
    """Yield the temporary name; on a clean exit rename it onto ``path`` (the caller has
    fsync'ed it), on an exception remove it."""
    path = os.fspath(path)
    # The pid keeps two processes writing the same file (a sweep's trials, a restarted run)
    # from sharing a temporary name.
    tmp = f"{path}.tmp-{os.getpid()}{suffix}"
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:  # never created, or already gone
            pass
        raise
    fsync_directory(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def atomic_open(path, mode="w", suffix="", **open_kwargs):
    """A new file object for ``path`` (mode "w", "wt" or "wb"; ``open_kwargs`` go to open()):
    what is written appears at ``path`` all at once when the block ends without an exception."""
    if mode not in _WRITE_MODES:  # appending or updating would start from an empty file
        raise ValueError(f"atomic_open writes whole files: mode must be one of {_WRITE_MODES}, "
                         f"not {mode!r}")
    with _staged(path, suffix) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path, suffix=""):
    """A temporary file name for a writer that takes a name (matplotlib's savefig, PIL, a hard
    link): the file it leaves there replaces ``path`` when the block ends without an exception.
    ``suffix`` ends the temporary name, for writers that pick the format from the extension
    (".png", ".gif")."""
    with _staged(path, suffix) as tmp:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)  # fsync needs a descriptor, any mode will do
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path, text):
    """``path`` holds ``text`` (all of it, or its old content after a crash)."""
    with atomic_open(path, "w") as f:
        f.write(text)
