"""The panels' contents: Rich renderables drawn from the model, one module per panel on
screen, testable without an app."""
