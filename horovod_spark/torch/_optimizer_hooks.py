"""What every distributed optimizer shares: the gradient hook and Horovod's misuse messages."""

TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before call to "
                   "step(). Increase backward_passes_per_step to accumulate gradients locally.")
ZERO_GRAD_RACE = ("optimizer.zero_grad() was called after loss.backward() but before optimizer.step() "
                  "or optimizer.synchronize(). This is prohibited as it can cause a race condition.")


def on_grad_ready(optimizer_ref, key):
    """A parameter's hook: calls ``optimizer._grad_ready(key)`` once its gradient is accumulated
    (``key``: what the optimizer keeps for that parameter, the parameter itself or its state).

    A weak reference: hooks live on the parameters, which may outlive the optimizer; once it is
    collected its hooks fall silent instead of launching allreduces nobody waits for."""
    def hook(_param):
        optimizer = optimizer_ref()
        if optimizer is not None:
            optimizer._grad_ready(key)
    return hook
