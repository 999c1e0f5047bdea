"""Rollouts: sampling responses (transformers or vLLM) and their token layout, and SCAPO's
drift-filtered decoding."""
