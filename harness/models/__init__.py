"""Tokenizers and models, the testbed's base policy (SFT bootstrap) and the cache that holds it."""
