"""GMTRouter: personalised routing over multi-turn user interactions, as a routing policy."""
