"""creditbench methods inside other trainers: verl (`creditbench.integrations.verl`) and TRL
(`creditbench.integrations.trl`). `creditbench.harness.services.engines` says which methods can run
there and builds the batch they read; neither engine is imported until its adapter is."""
