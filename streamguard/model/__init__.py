"""The model as a first-class object (issue 11): calibration with confidence, model sets, plans
robust over a model set, and the drift guard. See docs/model-sets.md for the derivations."""
