"""The real-node tier. A package, so its `scope="package"` fixtures (the node, the chart) end with the tier
instead of staying up through the tiers pytest runs after it."""
