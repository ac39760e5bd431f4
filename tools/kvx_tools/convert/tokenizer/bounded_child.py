"""Runs a function in a forked child process whose wall-clock time and memory are bounded, for work whose cost
the input decides: a chat template is a program (Jinja has loops, recursion and string arithmetic), and
jinja2's sandbox bounds neither its time nor its memory.

The child is forked, not spawned: it starts in milliseconds with everything already imported, which keeps the
normal path (a template renders in a millisecond) as fast as rendering in place. Limits, each for its reason:
  - wall clock: the parent waits at most `seconds`, then kills the child (the limit the user sees);
  - CPU time (RLIMIT_CPU): a little more than `seconds`, so that the child dies on its own should the parent
    be killed before it could kill the child;
  - address space (RLIMIT_AS): what the child inherited plus `memory_bytes`; a larger allocation fails with
    MemoryError in the child rather than swapping the machine;
  - the result: at most RESULT_BYTES of pickled value come back.
"""

import os
import pickle
import resource
import select
import signal
import time

RESULT_BYTES = 1 << 20


class LimitExceeded(Exception):
    """The child ran out of time or memory; the message says which ("took longer than 10 s")."""


class ChildFailed(Exception):
    """fn raised in the child; the message is the exception's type and first line."""


def run_bounded(fn, *, seconds, memory_bytes):
    """fn()'s return value (which must pickle), computed in a child process under the limits above."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code, never runs its atexit handlers
        os.close(read_fd)
        _child(fn, write_fd, seconds, memory_bytes)
    os.close(write_fd)
    try:
        data = _read_result(read_fd, time.monotonic() + seconds)
    finally:  # also on Ctrl-C: no child may outlive the wait for it
        os.close(read_fd)
        status = _reap(pid)
    if data is None or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU):
        raise LimitExceeded(f"took longer than {seconds:g} s")
    if not data:
        raise ChildFailed("the process ended without a result")
    kind, value = pickle.loads(data)
    if kind == "memory":
        raise LimitExceeded(f"needed more than {memory_bytes >> 20} MiB of memory")
    if kind == "error":
        raise ChildFailed(value)
    return value


def _child(fn, write_fd, seconds, memory_bytes):
    status = 1
    try:
        _limit_self(seconds, memory_bytes)
        try:
            result = ("value", fn())
        except MemoryError:
            result = ("memory", None)
        except Exception as e:  # anything fn raises is the input's fault: the parent reports it in one line
            first_line = (str(e).strip().splitlines() or [""])[0]
            result = ("error", f"{type(e).__name__}: {first_line}" if first_line else type(e).__name__)
        data = pickle.dumps(result)
        if len(data) <= RESULT_BYTES:
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
            status = 0
    except BaseException:  # out of memory while pickling, Ctrl-C: the parent sees no result
        pass
    finally:
        os._exit(status)


def _limit_self(seconds, memory_bytes):
    cpu = int(seconds) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    try:
        with open("/proc/self/statm") as f:  # Linux: size of the address space in pages
            inherited = int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return  # elsewhere the time limit still holds
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = inherited + memory_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _read_result(fd, deadline):
    """The bytes the child wrote before closing the pipe (b"" for none, or too many); None if the deadline
    passed first."""
    chunks, size = [], 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > RESULT_BYTES:
            return b""


def _reap(pid):
    """The child's wait status; one still running (past the deadline, or the parent interrupted) is killed."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done == 0:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    return status
