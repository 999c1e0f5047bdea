"""Credit-assignment methods: one file per method, pure tensor math, torch only."""
