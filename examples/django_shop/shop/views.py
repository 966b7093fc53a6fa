"""The order views: the order row and its jobs commit, or roll back, together."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

import ratchet_django
from shop.jobs import charge_order
from shop.models import Order
from shop.tasks import send_receipt


class PaymentDeclined(Exception):
    pass


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Create an order, a charge job and a receipt task in one transaction. ``decline=1``
    fails after both were enqueued: the rollback takes the order and the jobs away."""
    try:
        with transaction.atomic():
            order = Order.objects.create(
                item=request.POST["item"], quantity=int(request.POST.get("quantity", 1))
            )
            charge = ratchet_django.enqueue(charge_order, order.id)
            receipt = send_receipt.enqueue(order.id)
            if request.POST.get("decline") == "1":
                raise PaymentDeclined(f"card declined for order {order.id}")
    except PaymentDeclined as exc:
        return JsonResponse({"error": str(exc)}, status=402)
    return JsonResponse(
        {"order": order.id, "charge_job": str(charge.id), "receipt_task": receipt.id}, status=201
    )


@require_GET
def order_detail(request: HttpRequest, order_id: int) -> JsonResponse:
    order = Order.objects.get(pk=order_id)
    return JsonResponse({"order": order.id, "paid": order.paid, "receipt": order.receipt_sent})


@require_GET
def receipt_status(request: HttpRequest, result_id: str) -> JsonResponse:
    """The receipt task's ``TaskResult``, read back from its Ratchet job."""
    result = send_receipt.get_result(result_id)
    body = {"status": str(result.status), "attempts": result.attempts}
    if result.is_finished and not result.errors:
        body["value"] = result.return_value
    return JsonResponse(body)
