/* SPDX-License-Identifier: MIT */
/*
 * Intrusive doubly linked list (the Linux kernel's shape): objects embed a
 * struct list and can sit on a queue without a separate allocation.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct list {
        struct list *prev, *next;
};

#define LIST_INIT(name) { &(name), &(name) }

static inline void list_init(struct list *l) {
        l->prev = l->next = l;
}

static inline bool list_empty(const struct list *l) {
        return l->next == l;
}

/* An unlinked node points to itself, so list_unlink() twice is harmless. */
static inline bool list_linked(const struct list *n) {
        return n->next != n && n->next != NULL;
}

static inline void list_add_tail(struct list *head, struct list *n) {
        n->prev = head->prev;
        n->next = head;
        head->prev->next = n;
        head->prev = n;
}

static inline void list_unlink(struct list *n) {
        if (!n->next)
                return;
        n->prev->next = n->next;
        n->next->prev = n->prev;
        n->prev = n->next = n;
}

#define list_entry(ptr, type, member) \
        ((type *)((char *)(ptr)-offsetof(type, member)))

#define list_first_entry(head, type, member) \
        (list_empty(head) ? NULL : list_entry((head)->next, type, member))

/* The body must not unlink pos (list_for_each_safe allows that). */
#define list_for_each(pos, head) for (pos = (head)->next; pos != (head); pos = pos->next)

#define list_for_each_safe(pos, tmp, head) \
        for (pos = (head)->next, tmp = pos->next; pos != (head); pos = tmp, tmp = pos->next)
