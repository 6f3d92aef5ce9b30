"""How the operator talks to the API server: its client, what its errors mean, Events, event lookups, the
leader Lease, and the work queue its reconciles run on."""
