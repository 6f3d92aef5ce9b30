"""The seed's train(), ported, as a function a notebook hands to
`MirroredStrategyRunner(num_slots=2, cluster=Cluster(...)).run(train)`. TensorFlow is imported inside, so
the submitting process never loads it."""


def train(epochs=60):
    import tensorflow as tf
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from mwms_trainer import log_model, mlflow_callback

    tf.keras.utils.set_random_seed(42)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        data = load_breast_cancer()
        X_train, X_test, y_train, y_test = train_test_split(
            data.data, data.target, test_size=0.3, random_state=42
        )
        N, D = X_train.shape
        scaler = StandardScaler()
        X_train = scaler.fit_transform(X_train)
        X_test = scaler.transform(X_test)
        model = tf.keras.models.Sequential(
            [tf.keras.layers.Input(shape=(D,)), tf.keras.layers.Dense(1, activation="sigmoid")]
        )
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    r = model.fit(
        X_train,
        y_train,
        validation_data=(X_test, y_test),
        epochs=epochs,
        batch_size=32,
        callbacks=[mlflow_callback()],
    )
    log_model(model, "mymodel")
    return {k: float(v[-1]) for k, v in r.history.items()}
