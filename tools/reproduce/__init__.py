"""``creditbench reproduce``: a paper card's recipe planned, run, and set beside the paper's
numbers."""
