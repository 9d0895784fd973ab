"""The client HTTP API (README: "Identity and publishing rules"): routes on a Powertools resolver."""
