"""The MultiKueue tier. A package, so its `scope="package"` fixtures (the two clusters, the real node) end
with the tier instead of staying up through the tiers pytest runs after it."""
