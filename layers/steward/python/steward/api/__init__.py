"""The client HTTP API (docs/concepts/identity.md): routes on a Powertools resolver."""
