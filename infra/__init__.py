"""The CDK app: one Stack composing one Construct per capability (docs/architecture.md)."""
