"""Lines printed to a terminal that Spark's console progress bar shares.

Spark's ``ConsoleProgressBar`` (``spark.ui.showConsoleProgress``) draws ``[Stage N:>  (0 + 2) / 2]``
on the JVM's stderr and ends it with a carriage return, not a newline, so the next line printed
on the same terminal would begin inside the bar. The bar's setting is read once, when the
SparkContext starts, so a running session cannot switch it off for one job. Instead, a line to a
terminal begins by returning to the line's start and erasing it: a pending bar is wiped, not
interleaved, and Spark draws it anew below at its next update. Files and pipes get the plain line.
"""

# Carriage return, then ANSI "erase to the end of the line".
CLEAR_LINE = "\r\033[K"


def line_start(stream) -> str:
    """What a line written to ``stream`` begins with: CLEAR_LINE on a terminal, else nothing."""
    try:
        return CLEAR_LINE if stream.isatty() else ""
    except (AttributeError, OSError, ValueError):
        return ""
