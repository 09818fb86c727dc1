"""Errors the course raises instead of tracebacks from deep inside Triton or the driver.

Each message says what was wrong and what to do; widgets print it, tests match on it."""


class CourseError(ValueError):
    """A configuration or input the course refuses, with the reason in the message."""


class TMAError(CourseError):
    """A tensor or box that breaks a TMA rule (alignment, contiguity, box size)."""


class SharedMemoryError(CourseError):
    """A tile configuration that does not fit in one block's shared memory."""


class NoGPUError(CourseError):
    """Something that can only run on a CUDA device."""


class ArgumentError(CourseError):
    """A tensor a launcher cannot use as given: wrong shape, dtype, device or layout."""
