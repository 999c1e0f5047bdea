"""The ``creditbench`` command line: one module per verb; ``main`` builds the parser."""
