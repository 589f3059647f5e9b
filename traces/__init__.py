"""The trace format: schema, validation, readers and writers, converters, acceptance models, synthesis.

``traces`` imports nothing of the rest of the project; every other package may import it.
"""
