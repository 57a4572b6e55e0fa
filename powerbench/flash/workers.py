"""`Workers`: daemon threads taking `Task`s from one C-level queue (the reader's I/O pool)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class Task:
    """A job handed to a `Workers` thread; `result()` blocks until it ran (re-raising)."""

    __slots__ = ("fn", "args", "_done", "_outcome")

    def __init__(self, fn: Callable[..., object], args: tuple) -> None:
        self.fn, self.args = fn, args
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._outcome: tuple[bool, object] | None = None

    def run(self) -> None:
        try:
            self._done.put((True, self.fn(*self.args)))
        except BaseException as err:  # handed to the waiter
            self._done.put((False, err))

    def result(self) -> object:
        if self._outcome is None:
            self._outcome = self._done.get()
        ok, value = self._outcome
        if not ok:
            raise value  # type: ignore[misc]
        return value


class Workers:
    """Daemon threads taking `Task`s from one C-level `SimpleQueue`: a hand-off costs a
    few microseconds (`ThreadPoolExecutor.submit` costs ~100 us under CPU contention, in
    its Python-level idle semaphore)."""

    def __init__(self, n: int, name: str = "flash-io") -> None:
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _loop(self) -> None:
        while True:
            task = self.q.get()
            if task is None:
                return
            task.run()

    def submit(self, fn: Callable[..., object], *args: object) -> Task:
        task = Task(fn, args)
        self.q.put(task)
        return task

    def shutdown(self) -> None:
        for _ in self.threads:
            self.q.put(None)
        for t in self.threads:
            t.join()
