"""Jobs that write their own log (tests of ``context.logger()`` and retention)."""

from __future__ import annotations

from ratchet import JobContext


def noop() -> None:
    """Does nothing."""


def chatty(lines: int) -> int:
    """Writes ``lines`` INFO lines and one WARN line."""
    log = JobContext.current().logger()
    for i in range(lines):
        log.info("step %d of %d", i + 1, lines)
    log.warning("done")
    return lines


def fails_after_logging() -> None:
    """Logs, then fails (with the traceback logged too)."""
    log = JobContext.current().logger()
    log.info("starting attempt %d", JobContext.current().attempt)
    try:
        raise KeyError("missing-row")
    except KeyError:
        log.exception("lookup failed")
        raise


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")


def hostile() -> str:
    """Logs what could wedge a naive log store: NUL, lone surrogates, a 5 MB line, a broken
    format, an object whose ``__str__`` raises, and 20,000 lines."""
    log = JobContext.current().logger()
    log.info("nul \x00 byte")
    log.error("lone \ud800 surrogate and \udfff")
    log.info("x" * 5_000_000)
    log.info("%d broken %s format", "not-a-number")
    log.info(Unprintable())
    for i in range(20_000):
        log.debug("line %d", i)
    return "survived"
