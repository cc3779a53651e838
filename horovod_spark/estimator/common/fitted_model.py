"""What every fit adds to the Model its framework built: the types its label columns had in
training (they decide the types of the prediction columns), the estimator's classifier-column
Params, and a record of the Params the fit ran with (so the best model of a tuning run says which
grid point won)."""
from .output_columns import label_types_of_parquet
from .persistence import is_json_value

# Params an estimator passes on to its model as they are.
CARRIED = ("classification", "raw_prediction_col", "probability_col", "prediction_col")
# Left out of fit_params: the untrained model would only repeat what the fitted one holds.
_NOT_RECORDED = ("model",)


def finish(est, model, store, train_path: str, label_cols):
    model.set(model.label_types, label_types_of_parquet(store, train_path, label_cols))
    for name in CARRIED:
        if est.isSet(name):
            model.set(model.getParam(name), est.getOrDefault(name))
    model.set(model.fit_params, fit_params(est))
    return model


def fit_params(est) -> dict:
    """{name: value} of every Param of ``est`` (set or default); values JSON cannot hold as their repr."""
    return {param.name: value if is_json_value(value) else repr(value)
            for param, value in est.extractParamMap().items() if param.name not in _NOT_RECORDED}

