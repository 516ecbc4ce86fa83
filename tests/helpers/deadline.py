"""A call that must finish: run in a forked child with a deadline, for the tests of inputs that once took minutes.

A fork, not a thread: `re` holds the GIL for a whole match, so a thread's timeout only returns when the match does;
and not a Pool: the call and its arguments (a bound method, a lambda) are inherited by the fork, never pickled.
"""

from __future__ import annotations

import multiprocessing

DEADLINE_S = 20.0      # generous: each fixed call in these tests takes well under a second


def run_within(fn, *args, deadline: float = DEADLINE_S):
    """`fn(*args)`'s result, computed in a forked child; TimeoutError when it is not done within `deadline` seconds
    (the child is killed), AssertionError carrying the child's exception when it raised."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 — reported to the test, whatever it is
            send.send((False, repr(exc)))

    worker = ctx.Process(target=child, daemon=True)
    worker.start()
    if not receive.poll(deadline):
        worker.kill()
        worker.join()
        raise TimeoutError(f"{getattr(fn, '__qualname__', fn)} not done within {deadline:g} s")
    ok, result = receive.recv()
    worker.join()
    assert ok, f"{getattr(fn, '__qualname__', fn)} raised {result}"
    return result
