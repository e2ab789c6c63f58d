"""Step 1, sources -> work directory: find reference, implementation and cases by content (layouts A and B), the
layout-C trees, and the bundled example operators."""
