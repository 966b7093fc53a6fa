"""A plain Ratchet job: any module-level function the class policy allows."""

from __future__ import annotations

from shop.models import Order

PRICE_CENTS = 1250


def charge_order(order_id: int) -> dict[str, int]:
    """Charge the order (here: mark it paid) and return what was charged."""
    order = Order.objects.get(pk=order_id)
    order.paid = True
    order.save(update_fields=["paid"])
    return {"order": order_id, "charged_cents": order.quantity * PRICE_CENTS}
