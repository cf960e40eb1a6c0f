"""MLflow's models-from-code entry of the BioCheck agent: MLflow runs this file when it loads a logged agent
(`mlflow.pyfunc.load_model`, `mlflow models serve`); the model itself is `served.AgentModel`."""

import mlflow

from biocheck.wiring.served import AgentModel

mlflow.models.set_model(AgentModel())
