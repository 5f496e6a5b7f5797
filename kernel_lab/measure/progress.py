"""Progress of a long command (``bench``, ``check``): a rich bar with an honest ETA in a
terminal; in a pipe or a log, one plain line a minute at most.

Decisions:

* **Weights, not counts.** Items cost very different times (a skipped run: nothing; a
  ``torch.compile`` case: seconds; an interpreted Triton call: up to seconds a row), so each
  item carries a weight, its expected cost in seconds (a guess), and the estimate is
  ``remaining weight x elapsed / done weight``: the guesses fix the shape of the work, the clock
  its scale.
* **No ETA before data.** The estimate is hidden ("ETA -:--", "time left not known yet") until
  :data:`MIN_ITEMS` items and :data:`MIN_FRACTION` of the total weight are done, and while the
  item running weighs more than all the done ones together (the first ``torch.compile`` after
  a run of instant cases: rich's own column read 0:00:01 there, for a 3 s compile).
* **A stalled item pushes the ETA out.** Once the running item has taken longer than its
  weight predicts, the rate is re-read as if it ended now, so the ETA grows while it runs
  instead of standing still.
* **Pipes get lines, not a bar.** When the console is not a terminal, a line such as
  ``bench: 120/468 runs, 1:02 elapsed, ~3:10 left`` is printed :data:`FIRST_LINE_S` in, then
  at most once per :data:`LINE_INTERVAL_S` (a daemon thread ticks, so a long item still
  reports); nothing is printed at the end (the command's summary follows).
* The clock is injectable: tests drive :class:`Estimate` and :meth:`RunProgress.tick` with a
  fake one.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

MIN_ITEMS = 3  # items done before any ETA is shown
MIN_FRACTION = 0.05  # ... and this share of the total weight
FIRST_LINE_S = 10.0  # piped: the first line this long after the start
LINE_INTERVAL_S = 60.0  # piped: then at most one line per this long
MIN_WEIGHT = 1e-3  # an item's weight is at least this (a skip still takes a moment)


def clock_text(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour)."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Estimate:
    """Seconds left of a run of weighted items, from what the clock says of the items done.

    Items run in the order of ``weights``; call :meth:`finish` when one ends (times from the
    clock ``t0`` came from); :meth:`eta` is None until enough is done to say anything."""

    def __init__(self, weights: Sequence[float], t0: float, *, min_items: int = MIN_ITEMS,
                 min_fraction: float = MIN_FRACTION) -> None:
        self.weights = [max(MIN_WEIGHT, float(w)) for w in weights]
        self.total = sum(self.weights)
        self.t0 = t0
        self.min_items, self.min_fraction = min_items, min_fraction
        self.done_items = 0
        self.done_weight = 0.0
        self.last_done_t = t0  # when the latest item finished

    @property
    def current(self) -> float:
        """The weight of the item running now (the next one not done)."""
        i = self.done_items
        return self.weights[i] if i < len(self.weights) else MIN_WEIGHT

    def start(self, weight: float) -> None:
        """The running item's weight is ``weight`` after all (a better guess)."""
        i = self.done_items
        if i < len(self.weights):
            w = max(MIN_WEIGHT, float(weight))
            self.total += w - self.weights[i]
            self.weights[i] = w

    def finish(self, now: float) -> None:
        """The running item ended at ``now``."""
        self.done_weight += self.current
        self.done_items += 1
        self.last_done_t = now

    def known(self) -> bool:
        """Whether enough is done for an estimate."""
        if self.done_items >= len(self.weights):
            return True
        return (self.done_items >= self.min_items
                and self.done_weight >= max(self.min_fraction * self.total, self.current))

    def eta(self, now: float) -> float | None:
        """Seconds left, or None (not enough done yet)."""
        if not self.known():
            return None
        remaining = max(0.0, self.total - self.done_weight)
        if remaining <= 0.0:
            return 0.0
        rate = max(self.last_done_t - self.t0, 0.0) / max(self.done_weight, MIN_WEIGHT)
        cur = min(self.current, remaining)
        running = max(0.0, now - self.last_done_t)
        if running <= rate * cur:  # on time: the current item's rest, then the others
            return rate * (remaining - cur) + (rate * cur - running)
        # overdue: as if the current item ended now, at the slower rate that implies
        slow = (now - self.t0) / max(self.done_weight + cur, MIN_WEIGHT)
        return slow * max(0.0, remaining - cur)


class RunProgress:
    """Progress of ``len(weights)`` items on a rich ``console``: a bar with an honest ETA in a
    terminal, else plain lines (see the module's decisions). Use as a context manager::

        with RunProgress("bench", "runs", weights, console) as p:
            for item in items:
                p.start(f"{item}")   # before each item
                ...
                p.done()             # after it
    """

    def __init__(self, label: str, unit: str, weights: Sequence[float], console, *,
                 clock: Callable[[], float] = time.monotonic, terminal: bool | None = None,
                 first_line_s: float = FIRST_LINE_S, interval_s: float = LINE_INTERVAL_S,
                 ticker: bool = True, write: Callable[[str], None] | None = None) -> None:
        self.label, self.unit, self.console, self.clock = label, unit, console, clock
        self.total = len(weights)
        self.est = Estimate(weights, clock())
        self.terminal = console.is_terminal if terminal is None else terminal
        self.first_line_s, self.interval_s = first_line_s, interval_s
        self.next_line_t = self.est.t0 + first_line_s
        self.lines: list[str] = []  # what the piped mode printed (tests read it)
        self._write = write or (lambda s: console.print(s, markup=False, highlight=False))
        self._ticker = ticker and not self.terminal
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._bar = None
        self._task = None

    # -- the bar (terminal) or the ticker thread (pipe) ---------------------------------------
    def __enter__(self) -> "RunProgress":
        if self.terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), _eta_column(self),
                                 console=self.console, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total)
        elif self._ticker:
            self._thread = threading.Thread(target=self._tick_loop, daemon=True,
                                            name=f"{self.label}-progress")
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _tick_loop(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    # -- what the caller reports --------------------------------------------------------------
    def start(self, description: str = "", weight: float | None = None) -> None:
        """An item begins: its description; ``weight``: its guess in seconds, if not the one
        given up front. (Optional: after :meth:`done` the next item is running.)"""
        if weight is not None:
            with self._lock:
                self.est.start(weight)
        if self._bar is not None:
            self._bar.update(self._task, description=description)
        else:
            self.tick()

    def done(self) -> None:
        """The running item ended."""
        with self._lock:
            self.est.finish(self.clock())
        if self._bar is not None:
            self._bar.update(self._task, completed=self.est.done_items)
        else:
            self.tick()

    # -- what it shows ------------------------------------------------------------------------
    def eta_text(self, now: float | None = None) -> str:
        with self._lock:
            eta = self.est.eta(self.clock() if now is None else now)
        return "-:--" if eta is None else f"~{clock_text(eta)}"

    def line(self, now: float | None = None) -> str:
        """``bench: 120/468 runs, 1:02 elapsed, ~3:10 left`` (no ETA before data)."""
        now = self.clock() if now is None else now
        with self._lock:
            done, eta = self.est.done_items, self.est.eta(now)
        left = "time left not known yet" if eta is None else f"~{clock_text(eta)} left"
        return (f"{self.label}: {done}/{self.total} {self.unit}, "
                f"{clock_text(now - self.est.t0)} elapsed, {left}")

    def tick(self, now: float | None = None) -> str | None:
        """Piped mode: print the progress line if one is due (the line, else None)."""
        if self.terminal:
            return None
        now = self.clock() if now is None else now
        with self._lock:
            if now < self.next_line_t or self.est.done_items >= self.total:
                return None
            self.next_line_t = now + self.interval_s
        text = self.line(now)
        self.lines.append(text)
        self._write(text)
        return text


def _eta_column(progress: RunProgress):
    from rich.progress import ProgressColumn
    from rich.text import Text

    class EtaColumn(ProgressColumn):
        """``ETA ~m:ss`` from :class:`Estimate`; ``ETA -:--`` until it knows."""

        def render(self, task) -> Text:
            return Text(f"ETA {progress.eta_text()}", style="progress.remaining")

    return EtaColumn()
