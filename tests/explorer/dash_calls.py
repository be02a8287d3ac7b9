"""Call one of an explorer app's Dash callbacks as the browser would (a POST to Dash's update route through Flask's
test client), so that Dash's routing and ``ctx.triggered_id`` take part; no browser, no server."""

from __future__ import annotations

from typing import Any

from dash import Dash


def post_callback(app: Dash, output: str, inputs: list[Any], state: list[Any] = (), changed: str = ""):
    """The Flask response to the request that fires the callback whose output key contains ``output``, given its
    inputs' and states' values in order, ``changed`` (``"id.property"``) being the input that fired."""
    (key,) = [key for key in app.callback_map if output in key]
    callback = app.callback_map[key]
    outputs = (
        [part.rsplit(".", 1) for part in key.strip(".").split("...")] if key.startswith("..") else [key.rsplit(".", 1)]
    )
    values = lambda specs, given: [
        {"id": spec["id"], "property": spec["property"], "value": value} for spec, value in zip(specs, given)
    ]
    payload = {
        "output": key,
        "outputs": [{"id": i, "property": p} for i, p in outputs]
        if len(outputs) > 1
        else {"id": outputs[0][0], "property": outputs[0][1]},
        "inputs": values(callback["inputs"], inputs),
        "state": values(callback["state"], state),
        "changedPropIds": [changed] if changed else [],
    }
    return app.server.test_client().post("/_dash-update-component", json=payload)


def call_callback(app: Dash, output: str, inputs: list[Any], state: list[Any] = (), changed: str = "") -> Any:
    """The response of the callback `post_callback` fires, parsed ({} when the callback updated nothing: PreventUpdate
    or every output no_update); raises AssertionError for an HTTP error."""
    response = post_callback(app, output, inputs, state, changed)
    if response.status_code == 204:
        return {}
    assert response.status_code == 200, response.data.decode()[:2000]
    return response.get_json()["response"]
