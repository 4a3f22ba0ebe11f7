"""Operator implementations; users reach them as :class:`~pytimely.dataflow.stream.Stream` methods."""
