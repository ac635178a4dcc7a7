"""A file descriptor that becomes readable once a run has finished.

A worker process's control loop and the parent's supervisor thread wait in
``select`` on pipes and sentinels; :class:`EndSignal` lets them wait for a
run's end the same way instead of polling, since every wake-up of a waiting
thread takes the GIL from a computing worker.

Threading: created and closed by one thread; a small daemon watcher thread
waits on the run's ``finished`` event and writes one byte. Invariant: the byte
is written at most once, and never after :meth:`EndSignal.close` returned
(close joins the watcher before closing the pipe).

Example::

    ended = EndSignal(handle.finished, name="elastream-child-end")
    select.select([ended.fd], [], [], 5.0)   # returns once the run has finished
    ended.close()
"""

from __future__ import annotations

import os
import threading

#: How often the watcher re-checks whether it was told to stop (it normally just waits for the end).
CHECK_S = 0.5


class EndSignal:
    """``fd`` becomes readable once ``finished`` is set; :meth:`close` stops the watcher and the pipe."""

    def __init__(self, finished: threading.Event, name: str = "elastream-end-signal"):
        self.fd, self._write_end = os.pipe()
        self._finished = finished
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def already_set(cls) -> EndSignal:
        """A signal that is readable from the start (a part with nothing to run)."""
        done = threading.Event()
        done.set()
        return cls(done)

    def _watch(self) -> None:
        while not self._finished.wait(CHECK_S):
            if self._closed.is_set():
                return
        if not self._closed.is_set():
            os.write(self._write_end, b"x")

    def close(self) -> None:
        """Stop the watcher (at most :data:`CHECK_S` later) and close both ends of the pipe; idempotent."""
        if self._closed.is_set():
            return  # a second close must not close descriptor numbers reused since
        self._closed.set()
        self._thread.join(CHECK_S + 1.0)
        for fd in (self.fd, self._write_end):
            try:
                os.close(fd)
            except OSError:
                pass
