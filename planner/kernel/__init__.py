"""The simulation core: struct-of-arrays state and the jitted step loop."""
