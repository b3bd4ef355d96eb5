"""Built-in job programs: generation, extraction, audit, and the simulated engine."""
