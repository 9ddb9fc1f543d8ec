"""Model providers: the catalog of known endpoints, the simulator and the HTTP adapters."""
