"""Analysis: statistics, error typing, slices, recommendations, hit rates and planted causes."""
