"""The shop's pages."""

from django.urls import path

from . import views

urlpatterns = [
    path("items/", views.item_list),
    path("items/<int:item_id>/", views.item_detail),
    path("items/reprice", views.reprice),
    path("categories/<str:category>/", views.category),
    path("customers/<str:customer>/orders", views.customer_orders),
    path("customers/<str:customer>/days", views.customer_days),
    path("orders", views.place_order),
    path("metrics", views.metrics),
]
