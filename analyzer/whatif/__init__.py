"""What-if stage: replay on the graph, the ideal run, the counterfactual verdict and its attribution, scenarios."""
