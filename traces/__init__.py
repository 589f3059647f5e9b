"""The trace format: schema, validation, readers and writers, converters, acceptance models, synthesis.

``traces`` imports nothing of the rest of the project; every other package may import it.
The public surface is listed in ``__all__`` and documented in ``docs/traces.md``.
"""

from traces.errors import Problem, SpecschedError, TraceValidationError
from traces.io import TraceArrays, iter_trace_batches, read_trace_arrays, write_trace
from traces.schema import FORMAT_VERSION, TRACE_SCHEMA
from traces.validate import ValidationReport, validate_trace

__all__ = [
    "FORMAT_VERSION",
    "TRACE_SCHEMA",
    "Problem",
    "SpecschedError",
    "TraceArrays",
    "TraceValidationError",
    "ValidationReport",
    "iter_trace_batches",
    "read_trace_arrays",
    "validate_trace",
    "write_trace",
]
