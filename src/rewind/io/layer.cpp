// placeholder so the layer library has a translation unit
