from __future__ import annotations

from django.urls import path

from shop import views

urlpatterns = [
    path("orders/", views.place_order),
    path("orders/<int:order_id>/", views.order_detail),
    path("receipts/<str:result_id>/", views.receipt_status),
]
