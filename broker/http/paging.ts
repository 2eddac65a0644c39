/** The paging every list route shares: the query that asks for a page and the answer that holds it. */
import { z, type ZodType } from 'zod';

/**
 * `offset` and `items_per_page` of a list route (query strings, hence coerced). A route with
 * filters spreads `pagingQuery.shape` after them.
 */
export const pagingQuery = z.object({
  offset: z.coerce.number().int().min(0).default(0),
  items_per_page: z.coerce.number().int().min(1).max(1000).default(50),
});

/** `{items, total}`: one page of a list and how many items there are in all (shared ListPage). */
export function listPage<T extends ZodType>(item: T) {
  return z.object({ items: z.array(item), total: z.number() });
}
