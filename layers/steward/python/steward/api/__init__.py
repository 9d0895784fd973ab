"""The client HTTP API (DESIGN section 4): routes on a Powertools resolver."""
