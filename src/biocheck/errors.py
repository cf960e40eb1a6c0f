"""The one root of the failures a user can fix (`BioCheckError`): its message says what is wrong, where, and
how to fix it. The CLI (`biocheck.cli`) and the Prefect flows' entry (`orchestration.entry`) catch this class,
and only this class, to print one line instead of a traceback; every such error of the package derives from
it (input, download, search, model backend, judge, judge cache)."""


class BioCheckError(Exception):
    """A failure whose message tells the user what to do: printed as one line, never with a traceback."""
