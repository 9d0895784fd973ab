"""The CDK app: one Stack composing one Construct per capability (DESIGN section 2)."""
