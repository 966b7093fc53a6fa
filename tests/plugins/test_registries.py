"""The typed registries that registry hooks fill: what plugins may register, and who did."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ratchet import hookimpl
from ratchet.domain.errors import ConfigurationError
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.registry import CoordinatorRegistry, ExecutorRegistry, StoreRegistry

REGISTRY_HOOKS = {
    "ratchet_register_stores": "stores",
    "ratchet_register_coordinators": "coordinators",
    "ratchet_register_executor_providers": "executor_providers",
}


def registering(hook: str, name: object, factory: object) -> object:
    def impl(self: object, registry: Any) -> None:
        registry.add(name, factory)

    return type("Sloppy", (), {hook: hookimpl(impl)})()


@pytest.mark.parametrize(
    "hook, kind",
    [
        ("ratchet_register_stores", "store"),
        ("ratchet_register_coordinators", "coordinator"),
        ("ratchet_register_executor_providers", "executor provider"),
    ],
)
def test_registries_refuse_a_factory_that_is_not_callable(hook: str, kind: str) -> None:
    plugins = Plugins(
        make_plugin_manager(load_entrypoints=False, extra=[registering(hook, "x", "x://")])
    )
    with pytest.raises(ConfigurationError) as err:
        getattr(plugins, REGISTRY_HOOKS[hook])
    message = str(err.value)
    assert f"registers the {kind} 'x' with 'x://', which is not callable" in message
    assert ".Sloppy)" in message, "the message names the plugin"


@pytest.mark.parametrize("name", ["", None, 7])
def test_registries_refuse_a_name_that_is_not_a_string(name: object) -> None:
    plugins = Plugins(
        make_plugin_manager(
            load_entrypoints=False,
            extra=[registering("ratchet_register_stores", name, lambda url, options: None)],
        )
    )
    with pytest.raises(ConfigurationError, match="the name must be a non-empty string"):
        _ = plugins.stores


@pytest.mark.parametrize(
    "registry_type, factory",
    [
        (StoreRegistry, lambda url, options: None),
        (CoordinatorRegistry, lambda spec, context: None),
        (ExecutorRegistry, lambda max_workers: None),
    ],
)
def test_a_registry_records_who_added_what(
    registry_type: type[StoreRegistry | CoordinatorRegistry | ExecutorRegistry],
    factory: Callable[..., Any],
) -> None:
    registry = registry_type()
    registry.owned_by("one").add("Name", factory)
    with pytest.raises(ConfigurationError, match=rf"the {registry.kind} 'NAME': one and two"):
        registry.owned_by("two").add("NAME", factory)
    assert list(registry) == ["name"] and registry["NAME"] is factory
    assert registry.owner("name") == "one"
    with pytest.raises(ConfigurationError, match=r"plugin \? registers .* not callable"):
        registry.add("other", 42)
