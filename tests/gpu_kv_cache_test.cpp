// placeholder, written below
