"""Step 2, the limit search: the max-shape probe and its gates, the (case, scale) grid search, its pool and its
numerator."""
