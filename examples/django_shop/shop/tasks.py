"""A Django task: ``send_receipt.enqueue(order_id)`` stores it as a Ratchet job."""

from __future__ import annotations

from shop.models import Order

try:
    from django.tasks import task
except ImportError:  # Django before 6
    from django_tasks import task  # type: ignore[no-redef]


@task(queue_name="emails", priority=10)
def send_receipt(order_id: int) -> str:
    """Send the receipt (here: mark it sent) and return its text. An empty order fails (and
    is retried: the backend's MAX_RETRIES)."""
    order = Order.objects.get(pk=order_id)
    if order.quantity == 0:
        raise ValueError(f"order {order_id} is empty: no receipt")
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return f"receipt for order {order_id}: {order.quantity} x {order.item}"
