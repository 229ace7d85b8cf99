print("strata-bench: not yet")
