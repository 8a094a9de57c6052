"""The top layer: the `searchrl` command line and the start-up scripts. Nothing in the project imports it."""
